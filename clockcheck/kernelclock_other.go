//go:build !linux

package clockcheck

// ReadKernelClock returns ErrKernelClockUnsupported: only Linux exposes its
// clock discipline through adjtimex.
func ReadKernelClock() (KernelReading, error) {
	return KernelReading{}, ErrKernelClockUnsupported
}
