"""evofuse"""
