package account

// OperatorActor returns the actor of account changes made with direct access to
// the store — the `idkeeper users` command on --store — named who (the operating
// system's user, say). Whoever can open the store can change any record anyway:
// Service lets this actor do what an enabled admin may (the rules that protect
// the last enabled admin still hold), the audit log names it "operator:WHO", and
// the accounts it adds have CreatedBy "operator:WHO". It is never stored. The
// admin web must never use it: its actors are the users of its sessions. Its Name
// is "operator:WHO", which no account can have (ValidUserName): the rules about an
// admin's own account never apply to it.
func OperatorActor(who string) User {
	return User{Name: "operator:" + who, Role: RoleAdmin, operator: true}
}

// AuditActor is u as the audit log names it when it acts: "user:NAME", or
// "operator:WHO" for an OperatorActor.
func (u User) AuditActor() string {
	if u.operator {
		return u.Name
	}
	return "user:" + u.Name
}

// IsOperator reports whether u is an OperatorActor: the operator of the store,
// not an account of the admin web.
func (u User) IsOperator() bool { return u.operator }
