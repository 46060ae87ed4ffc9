"""Who is asking and what they may do (issue 10): users, password hashes, the statement ->
privilege table, authentication of admin calls and the audit trail of statements."""
