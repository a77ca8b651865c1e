"""What the command line does besides running the daemon: backups, the chat beside a daemon."""
