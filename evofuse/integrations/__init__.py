"""evofuse inside the models people run: one module per model family, each with `patch(model)` and
`unpatch(model)`."""
