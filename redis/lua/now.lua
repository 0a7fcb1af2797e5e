-- now: KEYS meta (only to route the call to the node that owns the store's slot).
-- Returns Redis TIME in Unix ms.
return clock('')
