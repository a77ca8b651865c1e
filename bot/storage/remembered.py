"""The one rule of what memory, search and vectors may read: never a message a chat sent in incognito.

Every query that reads messages for them goes through NOT_INCOGNITO; the search index's
triggers are built from it too, so a message off the record is never indexed nor embedded.
"""

from __future__ import annotations

# `{m}`: the alias of the mate_message row the clause is about. A conversation's messages
# after `after_message_id` in mate_incognito are off the record.
NOT_INCOGNITO = ("NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = {m}.conversation_id "
                 "AND {m}.id > i.after_message_id)")
