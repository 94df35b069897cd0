"""Command-line interface: `fuseplanner COMMAND ...`. Each command lives in its own module."""
