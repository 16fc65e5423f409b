import json

from django.core.management.base import CommandError

from accounting.management.commands._writes import DeclaredCommand
from accounting.notify.listen import heard, open_listener
from accounting.notify.payloads import CHANNELS
from accounting.operators.notifications import describe, named_fields


class Command(DeclaredCommand):
    help = (
        "Listen on acct_release and acct_limit_change, as the NOTIFY-era scheduler does, and print each "
        "notification as it arrives, decoded as the scheduler decodes it, with show, allocation, folder, "
        "job, layer and department names beside the ids; until stopped (Ctrl-C), --count notifications or "
        "--seconds. A payload the scheduler would drop is printed as such. Only what commits is heard."
    )
    writes = ()

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--channel", action="append", choices=CHANNELS, help="one channel (repeatable); default both"
        )
        parser.add_argument(
            "--json", action="store_true", help="one JSON object per line: channel, payload, fields with names"
        )
        parser.add_argument("--count", type=int, metavar="N", help="stop after N notifications")
        parser.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds")

    def handle(self, *args, channel: list[str] | None, count: int | None, seconds: float | None, **options) -> None:
        if count is not None and count < 1:
            raise CommandError("--count must be 1 or more", returncode=2)
        if seconds is not None and seconds <= 0:
            raise CommandError("--seconds must be more than 0", returncode=2)
        channels = tuple(channel or CHANNELS)
        with open_listener(channels=channels) as listener:
            self.stderr.write(f"listening on {', '.join(channels)}")
            self.stderr.flush()
            try:
                for one in heard(listener=listener, timeout=seconds, stop_after=count):
                    if options["json"]:
                        line = json.dumps(
                            {
                                "channel": one.channel,
                                "payload": one.payload,
                                "problem": one.problem,
                                "fields": named_fields(heard=one),
                            }
                        )
                    else:
                        line = describe(heard=one)
                    self.stdout.write(line)
                    self.stdout.flush()
            except KeyboardInterrupt:
                pass
