// Package archcheck holds the test that keeps ARCHITECTURE.md's package
// table true: every package of the module has a row, and each row's
// "depends on" column names exactly the packages and modules the package
// imports. It has no code of its own; a map that drifts from the code is
// worse than none, so the drift fails `make test`.
package archcheck
