"""One run, in order: prepare its parts, the session, the loop and its scheduler, measuring, the report."""
