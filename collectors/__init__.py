"""collectors"""
