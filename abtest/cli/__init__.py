"""The command line: parse, call one use-case, render. No logic lives here."""
