"""The command line: a thin face that parses, calls one library function and reports
(tables for people, JSON for programs)."""
