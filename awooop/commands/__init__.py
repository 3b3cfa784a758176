"""CLI subcommands, one module each (see awooop.cli.COMMANDS)."""
