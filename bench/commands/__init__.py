"""The command line: typer commands that parse flags, call one flow and print with rich (`cli.app`)."""
