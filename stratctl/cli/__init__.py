"""The command line: Typer only. Each command parses, makes one core call and prints."""
