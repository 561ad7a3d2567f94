"""arborl command line: Hydra-composed configuration and the `arborl` entry point."""
