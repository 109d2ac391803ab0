"""alembic migrations of the SQL store, applied by :mod:`koboi_store_sql.migrate`."""
