"""The package as users install it: the built wheel in a fresh virtualenv, running studies."""
