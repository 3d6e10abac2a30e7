from bench.commands.cli import app

app(prog_name="bench")
