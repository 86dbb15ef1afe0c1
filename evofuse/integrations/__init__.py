"""evofuse inside the models people run: one module per model family (`boltz`, `openfold`, `protenix`,
`openfold3`), each with `patch(model)`, which puts evofuse's fused modules in place of the model's own (same
parameters, same names, the model's calls), and `unpatch(model)`."""
