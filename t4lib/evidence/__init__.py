"""What the project's claims rest on: the GPU verification ledger, the known-answer suites and
the report that writes the README's tables from results/."""
