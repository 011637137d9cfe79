package main

import (
	"testing"
	"time"
)

// The refresh section takes the median of depths a refresh that is not
// layered never measures: nothing measured is 0, which its table skips, not a panic.
func TestMedian(t *testing.T) {
	if got := median(nil); got != 0 {
		t.Errorf("median(nil) = %v, want 0", got)
	}
	if got := median([]time.Duration{3, 1, 2}); got != 2 {
		t.Errorf("median(3, 1, 2) = %v, want 2", got)
	}
}
