"""stratctl's version (pyproject.toml's), importable without loading anything else: a driver
writes it into its study's Lease and the CLI compares it with its own."""

VERSION = "0.1.0"
