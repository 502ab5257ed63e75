"""KTO: its preset section (`config`, torch-free) and its trainer (`trainer`).
Importing this package loads neither."""
