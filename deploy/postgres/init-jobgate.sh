#!/bin/sh
# Run once by the postgres image on an empty data directory (/docker-entrypoint-initdb.d):
# jobgate's own role, an ordinary one (not a superuser, no BYPASSRLS, so row-level security
# binds it), owning a schema of its name, which its search_path ("$user", public) finds first.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
     -v password="$JOBGATE_DB_PASSWORD" <<'SQL'
CREATE ROLE jobgate LOGIN PASSWORD :'password';
CREATE SCHEMA jobgate AUTHORIZATION jobgate;
SQL
