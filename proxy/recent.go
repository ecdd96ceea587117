package proxy

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Refusal is one refused request as the status page lists it (strings for
// token and mark, as everywhere: JSON numbers lose precision past 2^53).
type Refusal struct {
	Time     time.Time `json:"time"`
	Route    string    `json:"route"`
	Decision string    `json:"decision"`
	Status   int       `json:"status"`
	Resource string    `json:"resource,omitempty"`
	Token    string    `json:"token,omitempty"`
	Mark     string    `json:"mark,omitempty"`
	Detail   string    `json:"detail"`
}

// recentRefusals keeps the last refusals, a fixed ring: memory is bounded
// whatever the rate (during a store outage every fenced request is one).
type recentRefusals struct {
	mu   sync.Mutex
	ring [recentSize]Refusal
	next int
	n    int
}

const recentSize = 50

func (r *recentRefusals) add(x Refusal) {
	r.mu.Lock()
	r.ring[r.next] = x
	r.next = (r.next + 1) % recentSize
	r.n = min(r.n+1, recentSize)
	r.mu.Unlock()
}

// list returns the refusals kept, newest first.
func (r *recentRefusals) list() []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Refusal, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.ring[(r.next-i+recentSize)%recentSize])
	}
	return out
}

// Contested is a resource whose stale tokens were refused: several holders
// believed they owned it. Count is approximate past the tracker's size
// (see contestedResources); Mark is the mark of the latest refusal.
type Contested struct {
	Resource string    `json:"resource"`
	Route    string    `json:"route"`
	Stale    uint64    `json:"stale"`
	Mark     string    `json:"mark"`
	Last     time.Time `json:"last"`
}

// contestedResources counts stale refusals per resource in bounded memory
// with the space-saving algorithm (Metwally et al.): at most contestedSize
// resources are tracked; a new one takes the place of the least counted and
// inherits its count, so a resource refused often is never missed, and a
// count is over by at most what it inherited.
//
// The entries are kept in order of their counts, least first (the
// algorithm's stream summary as one array): the least counted is the
// first, and a count that grows by one moves its entry only to the end of
// the run of entries with the same count, found by binary search, so a
// refusal costs a map lookup and a few comparisons whatever the number
// tracked, not a scan of them all.
type contestedResources struct {
	mu     sync.Mutex
	order  []Contested    // by Stale, least first
	byName map[string]int // position in order
}

const contestedSize = 100

func (c *contestedResources) add(route, resource, mark string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.order = make([]Contested, 0, contestedSize)
		c.byName = make(map[string]int, contestedSize)
	}
	i, ok := c.byName[resource]
	switch {
	case ok:
	case len(c.order) < contestedSize:
		// Not full yet (only the first contestedSize resources): the new
		// entry, counted 0, goes first, and every position moves up one.
		c.order = slices.Insert(c.order, 0, Contested{Resource: resource})
		for j := range c.order {
			c.byName[c.order[j].Resource] = j
		}
		i = 0
	default: // the least counted gives its place and its count
		i = 0
		delete(c.byName, c.order[0].Resource)
		c.order[0].Resource = resource
		c.byName[resource] = 0
	}
	i = c.bump(i)
	e := &c.order[i]
	e.Route, e.Mark, e.Last = route, mark, at
}

// bump counts one more refusal for the entry at i, keeping order by
// count, and returns the entry's new position.
func (c *contestedResources) bump(i int) int {
	n := c.order[i].Stale
	// The end of n's run, its place now: just before the first entry
	// counted more, at or after i.
	end, _ := slices.BinarySearchFunc(c.order[i:], n+1, func(e Contested, t uint64) int { return cmp.Compare(e.Stale, t) })
	if end += i - 1; end != i {
		c.order[i], c.order[end] = c.order[end], c.order[i]
		c.byName[c.order[i].Resource], c.byName[c.order[end].Resource] = i, end
		i = end
	}
	c.order[i].Stale = n + 1
	return i
}

// top returns the n most refused resources, most first.
func (c *contestedResources) top(n int) []Contested {
	c.mu.Lock()
	out := slices.Clone(c.order)
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Contested) int {
		if c := cmp.Compare(b.Stale, a.Stale); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	return out[:min(n, len(out))]
}

// record keeps a refusal for the status page: in the ring, and a stale one
// among the contested resources.
func (m *Metrics) record(rt *route, d decision, pr *problem) {
	now := time.Now()
	m.recent.add(Refusal{Time: now, Route: rt.name, Decision: d.String(), Status: pr.Status,
		Resource: pr.Resource, Token: pr.Token, Mark: pr.HighWaterMark, Detail: pr.Detail})
	if (d == decStale || d == decStale.would()) && pr.Resource != "" {
		m.contested.add(rt.name, pr.Resource, pr.HighWaterMark, now)
	}
}

// RecentRefusals returns the last refusals this process made (at most 50),
// newest first.
func (m *Metrics) RecentRefusals() []Refusal { return m.recent.list() }

// MostContested returns up to n resources with the most stale refusals.
func (m *Metrics) MostContested(n int) []Contested { return m.contested.top(n) }
