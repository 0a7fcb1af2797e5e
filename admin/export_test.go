package admin

// Routes returns h's API route table, for the role × route matrix.
func Routes(*Handler) []RouteInfo { return APIRoutes() }
