"""`dynaspec bench`: every method on the same prompts, records, table and plots."""
