"""Every command: `main.py` is the table of subcommands; one module per command
(`search`, `measure`, `generate`, `export`, `report`, `profile`, `train`, `validate`)
turns its arguments into a call of the layer below and prints the result."""
