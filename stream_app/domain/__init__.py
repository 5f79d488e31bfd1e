"""The domain: wire models, user state, partition aggregates, the ingest engine, the hold,
priors and the plan. No Faust and no I/O."""
