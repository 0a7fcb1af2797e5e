package admin

import "github.com/idkeeper/idkeeper"

// RouteInfo is one route of the API's table, for the role × route matrix.
type RouteInfo struct {
	Method, Path string // Path with APIPrefix
	Role         idkeeper.Role
	UserOnly     bool
}

// Routes returns h's API route table.
func Routes(h *Handler) []RouteInfo {
	var out []RouteInfo
	for _, rt := range h.apiRoutes() {
		out = append(out, RouteInfo{rt.method, APIPrefix + rt.path, rt.role, rt.userOnly})
	}
	return out
}
