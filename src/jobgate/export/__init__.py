"""Evidence bundles: what a scope of runs is made of, exported as a signed zip that verifies offline."""
