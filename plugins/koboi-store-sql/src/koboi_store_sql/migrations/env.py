"""alembic environment, for developers running ``alembic`` by hand.

koboi itself never goes through this file: :mod:`koboi_store_sql.migrate` runs
the migrations on its own connection, inside its own transaction. To start a
new revision file::

    from alembic import command
    from alembic.config import Config
    from koboi_store_sql.migrate import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    command.revision(config, "what changes")

Every new revision needs a test that an older database is upgraded.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from koboi_store_sql.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass -x url=<database url>")
    with create_engine(url).begin() as connection:
        context.configure(
            connection=connection, target_metadata=metadata, version_table=VERSION_TABLE
        )
        context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
    context.run_migrations()
