//go:build chaos_unsafe

package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
)

// This file exists only in a chaos_unsafe build, for the fault-injection suite's
// negative control of the conditional reclaim (see idkeeper's unsafe_hooks_chaos.go).

// unsafeFreeBody frees the given node IDs whoever holds them, with no expiry check;
// watermarks stay, as in reclaim.lua, and the key counts and requester index follow.
// ARGV: guard (1-4), now, node IDs.
const unsafeFreeBody = `
local now, err = guard()
if err then return err end
local nodes, gone, keys = {}, {}, {}
for i = 6, #ARGV do
  local l = get_lease(ARGV[i])
  if l and not (gone[l.req] and gone[l.req][ARGV[i]]) then
    nodes[#nodes + 1] = ARGV[i]
    gone[l.req] = gone[l.req] or {}
    gone[l.req][ARGV[i]] = true
    keys[l.key] = (keys[l.key] or 0) + 1
  end
end
free_many(nodes, now)
for k, n in pairs(keys) do key_held(k, -n) end
for req, set in pairs(gone) do drop_requester_nodes(req, set) end
return #nodes
`

var scriptUnsafeFree = goredis.NewScript(assemble(unsafeFreeBody, "common", "lease"))

// UnsafeFree deletes the leases of nodes, whoever holds them and however long they
// still run, and frees the node IDs, under the guard g like every guarded method.
// Never call it outside a negative control.
func (s *Store) UnsafeFree(ctx context.Context, g idkeeper.Guard, nodes ...idkeeper.NodeID) (int, error) {
	args := make([]any, 0, len(nodes))
	for _, n := range nodes {
		args = append(args, int(n))
	}
	v, err := s.runGuarded(ctx, scriptUnsafeFree, "unsafe free", false, g, args...)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: unsafe free: unexpected reply %v", v)
	}
	return int(n), nil
}
