"""The diagram language: a YAML spec read, parsed, inferred and validated into a frozen
`Diagram`; one `DType` per element type and one record per operation that every layer
reads (docs/diagram-language.md)."""
