"""The seed 000 §41 CSI contracts as JSON Schemas, and checking documents against them."""

from jobgate.contracts.validation import (
    ContractError,
    Violation,
    contract_ids,
    event_contract,
    schema,
    validate,
    violations,
)

__all__ = ["ContractError", "Violation", "contract_ids", "event_contract", "schema", "validate", "violations"]
