"""The command line: `entry` builds the parser and dispatches; one thin module per subcommand (`check`,
`oracle`, `conform`, `prove`, `explore`, `audit`, `traces`, `show`, `diff`, `regenerate`, `campaign`)
parses its arguments and calls the room that does the work; `argtypes` holds the shared argument types.

Layer: application (may import every layer).
"""
