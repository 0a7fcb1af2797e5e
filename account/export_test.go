package account

import "time"

// SetLoginThrottleCapacity makes a's login throttle remember at most n entries.
func SetLoginThrottleCapacity(a *Service, n int) {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	a.throttle.capacity = n
}

// LoginThrottleLen is how many entries a's login throttle holds.
func LoginThrottleLen(a *Service) int {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	return len(a.throttle.seen)
}

// LoginSlowDelay is the slow-down of a login of an account with n failures.
func LoginSlowDelay(n int) time.Duration { return slowDelay(n) }

// LoginQueueLen is how many slowed logins of account wait for their turn in a.
func LoginQueueLen(a *Service, account string) int {
	a.throttle.mu.Lock()
	defer a.throttle.mu.Unlock()
	if c := a.throttle.seen[throttleKey{'u', account, ""}]; c != nil {
		return c.waiting
	}
	return 0
}
