#!/usr/bin/env python
"""Django's command-line utility for cuebot-acct in a checkout: the installed package's
`cuebot-acct` command (cuebot_acct.cli), run from here."""

from cuebot_acct.cli import main

if __name__ == "__main__":
    main()
