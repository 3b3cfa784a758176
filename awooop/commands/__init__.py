"""CLI subcommands, one module each (see awooop.cli.COMMAND_MODULES)."""
