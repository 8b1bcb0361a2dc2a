"""Working with retained evidence, outside a run: bundles for a pull request and their verification,
comparing two namespaces, re-deriving the trust tables and reports, and clearing split groups."""
