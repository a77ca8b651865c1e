"""The exit codes of every command: 0 success, 1 a runtime failure, 2 bad usage or configuration."""

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
