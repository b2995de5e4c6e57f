"""The `hermes` command line: thin click commands over the libraries."""
