// Package e2e holds the end-to-end tests: a real Temporal dev server, real
// Postgres, the provider simulators behind the real stripe-go and sendgrid-go
// clients, and a worker wired like the worker binary. They assert what a user
// would see: charges and emails counted at the providers, rows in Postgres,
// workflows in Temporal.
package e2e
