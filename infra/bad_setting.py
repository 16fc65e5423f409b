"""The one error a malformed configuration value raises, so every entry point can report it the same way.

Settings are read from the environment when a process starts; a value that cannot work (an
`OPENCUE_TABLES` that is neither mode, a Sentinel URL that does not parse) must stop the
process with one line naming the variable, what was wrong with it and what is accepted, not
with a traceback through Django's settings loader. The entry points (`manage.py`, the WSGI
module, the task cluster) catch this class and print its message alone; it is an
ImproperlyConfigured, so any other caller still sees Django's usual configuration error.
"""

from django.core.exceptions import ImproperlyConfigured


class BadSetting(ImproperlyConfigured):
    def __init__(self, *, setting: str, problem: str, accepted: str):
        self.setting = setting
        super().__init__(f"{setting} {problem}; accepted: {accepted}")
