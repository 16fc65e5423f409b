# The service's version, its one source: the build reads it (pyproject.toml), and so do
# `cuebot-acct --version`, /healthz, the cuebot_acct_build_info gauge, the admin's footer and each
# process's accounting.Instance record. CHANGELOG.md says what each version changed.
__version__ = "1.0.0"
