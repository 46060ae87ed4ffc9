"""The admin language operators type: parser (``sql.parser``), statement AST (``sql.ast``)
and the ``obadmin`` client (``sql.obadmin``). Executors live in ``rootservice.api.statements``."""
