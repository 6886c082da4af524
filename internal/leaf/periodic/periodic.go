// Package periodic runs a function on a ticker until it is stopped.
package periodic

import (
	"sync"
	"time"
)

// Run calls fn every d, in a goroutine of its own, until stop is called;
// stop returns once fn is no longer running and will not run again.
func Run(d time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
