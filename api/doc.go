// Package api is wdc's protocol on Temporal, in one place (docs/architecture.md, "Conventions"): task
// queues, workflow-ID builders, the names of every signal, update and query,
// one input and one result struct per message, and the search attributes.
//
// Workflows, activities, the executor and the CLI all import it; it imports
// only the pure core (lease, fleet, envelope, resource) and the SDK's
// search-attribute types, so activities never need to import workflows.
package api
