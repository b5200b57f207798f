"""Where alerts go: routes, the Slack transport, delivery tasks and their log."""
