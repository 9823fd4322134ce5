package pool

import "testing"

// TestClasses: Get rounds up to a class and hands out its whole size, Put
// takes back only a class's capacity, and a pooled buffer is reused
// without allocating.
func TestClasses(t *testing.T) {
	for _, tt := range []struct{ n, want int }{
		{0, Head}, {1, Head}, {Head, Head}, {Head + 1, Medium}, {Small, Small},
		{Large + 1, Frame}, {Frame + 1, Copy}, {Max, Max}, {Max + 1, Max + 1},
	} {
		if tt.n <= Max && Size(tt.n) != tt.want {
			t.Errorf("Size(%d) = %d, want %d", tt.n, Size(tt.n), tt.want)
		}
		b := Get(tt.n)
		if len(*b) != tt.want || cap(*b) != tt.want {
			t.Errorf("Get(%d): len %d cap %d, want %d", tt.n, len(*b), cap(*b), tt.want)
		}
		Put(b)
	}
	Put(nil)
	odd := make([]byte, 100)
	Put(&odd) // dropped
	if allocs := testing.AllocsPerRun(100, func() { Put(Get(Small)) }); allocs != 0 {
		t.Errorf("Get and Put: %v allocs, want 0", allocs)
	}
}

// TestClassBoundaries: class's search tree picks, at each class's size and
// on either side of it, the smallest class that holds n, as a walk through
// classes would.
func TestClassBoundaries(t *testing.T) {
	for _, size := range classes {
		for _, n := range []int{size - 1, size, size + 1} {
			want := -1
			for i, c := range classes {
				if n <= c {
					want = i
					break
				}
			}
			if got := class(n); got != want {
				t.Errorf("class(%d) = %d, want %d", n, got, want)
			}
		}
	}
}
