"""The command line: a thin face that parses, calls one library function and reports
(tables for people, JSON for programs)."""

import time

STARTED = time.perf_counter()  # before the commands' imports: -v's time summary counts them
