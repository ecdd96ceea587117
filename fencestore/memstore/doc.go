// Package memstore is a fencestore.Store that keeps its marks in a map, for
// tests and demos only. Admissions are atomic and exact like every store's, but
// nothing is durable: the marks vanish when the process exits, so after a
// restart a stale token is admitted again. Never use it to protect real data.
package memstore
