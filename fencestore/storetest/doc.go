// Package storetest is the conformance suite every fencestore.Store must pass.
// Run checks the comparison semantics exactly across the uint64 range
// (including the 2^53 and 2^64 edges, where a float or a locale-dependent
// string compare would go wrong), the independence of resources, the marks a
// Decision reports, context cancellation, and, under concurrent admissions, that
// every outcome is explainable by some order of atomic compare-and-advance
// steps consistent with real time. A store that passes may be put behind the
// proxy; one that does not must not be.
package storetest
