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
// watermarks stay, as in reclaim.lua. ARGV: sentinel, now, node IDs.
const unsafeFreeBody = `
local err = check_sentinel(ARGV[1])
if err then return err end
local now = clock(ARGV[2])
local nodes, gone = {}, {}
for i = 3, #ARGV do
  local l = get_lease(ARGV[i])
  if l then
    nodes[#nodes + 1] = ARGV[i]
    gone[l.req] = gone[l.req] or {}
    gone[l.req][ARGV[i]] = true
  end
end
free_many(nodes, now)
for req, set in pairs(gone) do
  local keep = {}
  for _, node in ipairs(requester_nodes(req)) do
    if not set[node] then keep[#keep + 1] = node end
  end
  set_requester_nodes(req, keep)
end
return #nodes
`

var scriptUnsafeFree = goredis.NewScript(lua("common") + lua("lease") + unsafeFreeBody)

// UnsafeFree deletes the leases of nodes, whoever holds them and however long they
// still run, and frees the node IDs. Never call it outside a negative control.
func (s *Store) UnsafeFree(ctx context.Context, nodes ...idkeeper.NodeID) (int, error) {
	sentinel, err := s.adopted()
	if err != nil {
		return 0, err
	}
	args := []any{sentinel, s.nowArg()}
	for _, n := range nodes {
		args = append(args, int(n))
	}
	v, err := s.run(ctx, scriptUnsafeFree, s.keys.lease, false, args...)
	if err != nil {
		return 0, wrap("unsafe free", err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redis: unsafe free: unexpected reply %v", v)
	}
	return int(n), nil
}
