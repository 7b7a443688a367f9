"""The public shapes of jobgate's records (runs, transitions, approvals, tokens...): one rendering
shared by the HTTP API, the command line and evidence bundles, so each shows a record the same way."""
