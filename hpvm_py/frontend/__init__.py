"""The front end: decorators, leaf lowering (Python AST → kernel IR), graph tracing."""
