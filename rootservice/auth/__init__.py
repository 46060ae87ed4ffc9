"""Who is asking and what they may do: users, password hashes, the statement ->
privilege table, authentication of admin calls and the audit trail of statements."""
